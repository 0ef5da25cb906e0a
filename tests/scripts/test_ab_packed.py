"""scripts/ab_packed.sh, the device side of a packed A/B: it unpacks each named variant
(NAME.amk.xz, NAME.tests.xz when packed) beside a link to the shared libraries, and hands
scripts/gpu_ab.sh its options, the binaries in the order named, then the bench arguments. A
variant that was not packed is named and nothing runs. gpu_ab.sh is replaced by a stand-in that
records its arguments (it needs a GPU)."""
import lzma
import os
import shutil
import subprocess
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "ab_packed.sh")


class AbPacked(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.variants = tempfile.mkdtemp()  # stands for /tmp/amk-variants
        os.makedirs(os.path.join(self.tmp, "scripts"))
        os.makedirs(os.path.join(self.tmp, "lib"))
        os.makedirs(os.path.join(self.tmp, "pack"))
        text = open(SCRIPT).read().replace("root=/tmp/amk-variants", f"root={self.variants}")
        with open(os.path.join(self.tmp, "scripts", "ab_packed.sh"), "w") as f:
            f.write(text)
        self.args_file = os.path.join(self.tmp, "args")
        with open(os.path.join(self.tmp, "scripts", "gpu_ab.sh"), "w") as f:
            f.write(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "{self.args_file}"\n')
        os.chmod(os.path.join(self.tmp, "scripts", "gpu_ab.sh"), 0o755)
        for name, data in (("base", b"base binary"), ("new", b"new binary")):
            with lzma.open(os.path.join(self.tmp, "pack", f"{name}.amk.xz"), "wb") as f:
                f.write(data)
        with lzma.open(os.path.join(self.tmp, "pack", "new.tests.xz"), "wb") as f:
            f.write(b"new tests")

    def tearDown(self):
        shutil.rmtree(self.tmp)
        shutil.rmtree(self.variants)

    def run_script(self, *args):
        return subprocess.run(["bash", os.path.join(self.tmp, "scripts", "ab_packed.sh"), *args],
                              cwd=self.tmp, capture_output=True, text=True)

    def test_unpacks_and_forwards_in_order(self):
        r = self.run_script("--lib", "lib", "pack", "new", "base", "--", "--rounds", "2",
                            "--preset", "llama-3.2-1b", "--", "--context", "4096")
        self.assertEqual(r.returncode, 0, r.stderr)
        args = open(self.args_file).read().split("\n")[:-1]
        new, base = (os.path.join(self.variants, n, "amk") for n in ("new", "base"))
        self.assertEqual(args, ["--rounds", "2", "--preset", "llama-3.2-1b", new, base, "--",
                                "--context", "4096"])
        self.assertEqual(open(new, "rb").read(), b"new binary")
        self.assertTrue(os.access(new, os.X_OK))
        self.assertEqual(open(os.path.join(self.variants, "new", "amk_gpu_tests"), "rb").read(),
                         b"new tests")
        self.assertFalse(os.path.exists(os.path.join(self.variants, "base", "amk_gpu_tests")))
        self.assertEqual(os.path.realpath(os.path.join(self.variants, "base", "lib")),
                         os.path.realpath(os.path.join(self.tmp, "lib")))

    def test_a_missing_variant_is_named_and_nothing_runs(self):
        r = self.run_script("--lib", "lib", "pack", "base", "absent", "--", "--preset", "tiny")
        self.assertEqual(r.returncode, 2)
        self.assertIn("absent.amk.xz", r.stderr)
        self.assertFalse(os.path.exists(self.args_file))

    def test_usage_without_a_library_folder(self):
        r = self.run_script("pack", "base")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--lib", r.stderr)


if __name__ == "__main__":
    unittest.main()
