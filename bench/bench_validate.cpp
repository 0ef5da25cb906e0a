// STUB: replaced by the validate() benchmark.
#include <benchmark/benchmark.h>
BENCHMARK_MAIN();
