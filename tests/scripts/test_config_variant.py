"""scripts/config_variant.py, the variants gpu_ab.sh and gpu_sweep.sh run on the GPU machine:
overrides land where they name (nested keys too), the base is left as it was, and a malformed
variant is refused with exit 2 and a message, writing nothing."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "config_variant.py")
BASE = {"tiling": {"q_proj": {"N_tile": 64}, "attention": {"kv_block": 64}},
        "smem_bytes_per_block": 196608, "threads_per_block": 256}


class ConfigVariant(unittest.TestCase):
    def run_variant(self, variant, base=BASE):
        with tempfile.TemporaryDirectory() as d:
            src, dst = os.path.join(d, "base.json"), os.path.join(d, "out.json")
            with open(src, "w") as f:
                json.dump(base, f)
            r = subprocess.run([sys.executable, SCRIPT, src, dst, variant],
                               capture_output=True, text=True)
            with open(src) as f:
                self.assertEqual(json.load(f), base)  # the base is never written
            out = json.load(open(dst)) if os.path.exists(dst) else None
            return r, out

    def assert_refused(self, variant, words, base=BASE):
        """The variant exits 2 with `words` in its message and writes nothing."""
        with self.subTest(variant=variant):
            r, out = self.run_variant(variant, base)
            self.assertEqual(r.returncode, 2)
            self.assertIn(words, r.stderr)
            self.assertIsNone(out)

    def test_overrides_land_where_they_name(self):
        r, out = self.run_variant("smem_bytes_per_block=0,tiling.q_proj.N_tile=32,"
                                  "tiling.k_proj.N_tile=48")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(out["smem_bytes_per_block"], 0)
        self.assertEqual(out["tiling"]["q_proj"], {"N_tile": 32})
        self.assertEqual(out["tiling"]["k_proj"], {"N_tile": 48})  # a new nested key
        self.assertEqual(out["tiling"]["attention"], {"kv_block": 64})
        self.assertEqual(out["threads_per_block"], 256)

    def test_fusion_grouping_items_append_a_group(self):
        r, out = self.run_variant("fusion_grouping+=attention_combine+gemv,threads_per_block=128")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(out["fusion_grouping"][-1], ["attention_combine", "gemv"])
        self.assertEqual(out["fusion_grouping"][:-1], BASE.get("fusion_grouping", []))
        self.assertEqual(out["threads_per_block"], 128)
        self.assert_refused("fusion_grouping+=gemv+", "empty op")

    def test_minus_items_remove_a_key(self):
        r, out = self.run_variant("-tiling.attention,fusion_grouping+=gemv+silu_mul+gemv")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(out["tiling"], {"q_proj": {"N_tile": 64}})
        self.assertEqual(out["fusion_grouping"][-1], ["gemv", "silu_mul", "gemv"])
        for variant in ["-tiling.down_proj", "-", "-threads_per_block.x"]:
            self.assert_refused(variant, "does not have")

    def test_fusion_grouping_items_remove_a_group(self):
        base = dict(BASE, fusion_grouping=[["rmsnorm", "gemv"], ["attention_combine", "gemv"]])
        r, out = self.run_variant("fusion_grouping-=attention_combine+gemv", base)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(out["fusion_grouping"], [["rmsnorm", "gemv"]])
        self.assert_refused("fusion_grouping-=gemv+silu_mul", "does not have", base)

    def test_string_keys_of_the_base_take_strings(self):
        base = dict(BASE, sm_assignment="round_robin", page_allocation="none")
        r, out = self.run_variant("sm_assignment=critical_path,threads_per_block=224", base)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(out["sm_assignment"], "critical_path")
        self.assertEqual(out["page_allocation"], "none")
        self.assertEqual(out["threads_per_block"], 224)
        r, out = self.run_variant("page_allocation=3", base)  # the base's type: a string
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(out["page_allocation"], "3")
        # A key the base does not hold as a string still needs an integer.
        self.assert_refused("sm_assignment=critical_path", "not an integer")
        self.assert_refused("tiling.q_proj.N_tile=wide", "not an integer")
        self.assert_refused("sm_assignment=", "empty", base)

    def test_base_copies_the_base(self):
        r, out = self.run_variant("base")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(out, BASE)

    def test_malformed_variants_are_refused_with_a_reason(self):
        for variant, words in [("smem_bytes_per_block", "KEY=VALUE"),
                               ("=3", "KEY=VALUE"),
                               ("smem_bytes_per_block=big", "not an integer"),
                               ("threads_per_block.x=1", "not an object")]:
            self.assert_refused(variant, words)

    def test_an_unreadable_base_is_named(self):
        r = subprocess.run([sys.executable, SCRIPT, "/nonexistent.json", "/tmp/x.json", "base"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("/nonexistent.json", r.stderr)


if __name__ == "__main__":
    unittest.main()
