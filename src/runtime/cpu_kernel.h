// What marks a CPU decoder kernel (cpu_matrix.cpp, cpu_attention.cpp): a wide (x86-64-v3) and a
// baseline clone of it, one picked per machine when the program loads, so one binary runs
// everywhere and still uses AVX2/FMA where it can.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define AMK_CPU_KERNEL __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define AMK_CPU_KERNEL
#endif
