# shellcheck shell=bash
# Sourced by the device scripts (gpu_check.sh, gpu_ab.sh, gpu_sweep.sh, sim_collect.sh): one
# folder a machine of the CPU reference's check logits (`amk bench --reference-cache`, keyed by
# the checkpoint's files, the context and the checked positions; a foreign or damaged entry
# reads as a miss), carried from one device call to the next. They cost most of a call's wall
# time otherwise: ~115 s a position for llama-3.1-8b, ~14 for llama-3.2-1b, on every machine
# start.
#
#   AMK_REFERENCE_CACHE  the folder (default /tmp/amk-references: it lives as long as the machine)
#   AMK_REFERENCE_SEED   a references.tgz (or a folder) an earlier call brought back, carried
#                        into this one: its entries are added to the folder before any run
#
# reference_cache_save writes $OUT/references.tgz: carry it into the next call and name it in
# AMK_REFERENCE_SEED (a new machine then checks against the logits computed on this one).
#
# The build machine can compute them instead, without a GPU and without device minutes (after an
# IR version change every key is new): the device run's preset, context and check positions,
# and the target it resolves, e.g. for gpu_check's 512-context benches and gpu_ab's default check
#   amk bench --preset llama-3.2-1b --preset-dir P --reference-only --reference-cache R \
#     --gpu h200 --context 512 [--check-positions 0,65]
# then `tar czf references.tgz -C R .` (the keys match: the presets are generated from a fixed
# seed and the key samples their files; checked on the 1B at 4,096, fortieth session).

reference_cache_dir="${AMK_REFERENCE_CACHE:-/tmp/amk-references}"

reference_cache_seed() {
  mkdir -p "$reference_cache_dir" || return 0
  local seed="${AMK_REFERENCE_SEED:-}"
  [[ -n "$seed" ]] || return 0
  if [[ -d "$seed" ]]; then
    cp -rn "$seed"/. "$reference_cache_dir"/
  elif [[ -f "$seed" ]]; then
    tar xzf "$seed" -C "$reference_cache_dir" --skip-old-files ||
      echo "reference cache: cannot unpack AMK_REFERENCE_SEED '$seed'; the check computes its logits" >&2
  else
    echo "reference cache: AMK_REFERENCE_SEED '$seed' is neither a file nor a folder; not seeded" >&2
  fi
  echo "reference cache: $(find "$reference_cache_dir" -type f | wc -l) entries in $reference_cache_dir"
}

# reference_cache_save DIR: the folder's entries as DIR/references.tgz (nothing when empty).
reference_cache_save() {
  local dir=$1
  [[ -d "$reference_cache_dir" && -n "$(ls -A "$reference_cache_dir" 2>/dev/null)" ]] || return 0
  tar czf "$dir/references.tgz" -C "$reference_cache_dir" . ||
    echo "reference cache: cannot write $dir/references.tgz" >&2
}
