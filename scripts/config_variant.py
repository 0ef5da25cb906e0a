#!/usr/bin/env python3
"""Writes a ScheduleConfig variant: BASE's JSON with comma-separated KEY=VALUE overrides of its
integer keys (a dotted KEY sets a nested one: tiling.attention.kv_block=128) and of the string
keys the base holds (the value's type follows the base's: sm_assignment=critical_path),
fusion_grouping+=A+B items that append the fusion group [A, B]
(fusion_grouping+=attention_combine+gemv), fusion_grouping-=A+B items that remove it (the base
must list it), and -KEY items that remove a (dotted) key (-tiling.down_proj). Used by
scripts/gpu_sweep.sh and scripts/gpu_ab.sh, which run on the GPU machine (its python3 alone).

    config_variant.py BASE DST VARIANT     (VARIANT "base": BASE unchanged)
"""
import json
import sys


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    base, dst, variant = sys.argv[1:4]
    try:
        with open(base) as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        print(f"config_variant: cannot read the base config {base}: {e}", file=sys.stderr)
        return 2
    if variant != "base":
        for kv in variant.split(","):
            if kv.startswith(("fusion_grouping+=", "fusion_grouping-=")):
                sign, group = kv[len("fusion_grouping")], kv[len("fusion_grouping+="):].split("+")
                if not all(group):
                    print(f"config_variant: '{kv}' names an empty op", file=sys.stderr)
                    return 2
                groups = config.setdefault("fusion_grouping", [])
                if sign == "+":
                    groups.append(group)
                elif group in groups:
                    groups.remove(group)
                else:
                    print(f"config_variant: '{kv}' removes a fusion group the base config does "
                          "not have", file=sys.stderr)
                    return 2
                continue
            if kv.startswith("-"):
                *path, leaf = kv[1:].split(".")
                node = config
                for part in path:
                    node = node.get(part) if isinstance(node, dict) else None
                if not leaf or not isinstance(node, dict) or leaf not in node:
                    print(f"config_variant: '{kv}' removes a key the base config does not have",
                          file=sys.stderr)
                    return 2
                del node[leaf]
                continue
            key, sep, value = kv.partition("=")
            if not sep or not key:
                print(f"config_variant: '{kv}' is not KEY=VALUE", file=sys.stderr)
                return 2
            *path, leaf = key.split(".")
            node = config
            for part in path:
                node = node.setdefault(part, {})
                if not isinstance(node, dict):
                    print(f"config_variant: {key}: '{part}' is not an object", file=sys.stderr)
                    return 2
            if isinstance(node.get(leaf), str):  # a string knob the base sets: a string again
                if not value:
                    print(f"config_variant: {key}'s value is empty", file=sys.stderr)
                    return 2
                node[leaf] = value
                continue
            try:
                node[leaf] = int(value)
            except ValueError:
                print(f"config_variant: {key}'s value '{value}' is not an integer (and the base "
                      "config holds no string there)", file=sys.stderr)
                return 2
    with open(dst, "w") as f:
        json.dump(config, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
