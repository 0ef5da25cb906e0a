"""scripts/reference_cache.sh, the device scripts' carried cache of the CPU reference's check
logits: a seed (a references.tgz an earlier call brought back, or a folder) adds its entries to
the machine's folder without overwriting one already there, the save packs the folder into
DIR/references.tgz (nothing for an empty folder), and a seed that cannot be read is said and
seeds nothing, without failing the script that sources it."""
import os
import subprocess
import tarfile
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "reference_cache.sh")


def run(cache, seed, commands):
    env = dict(os.environ, AMK_REFERENCE_CACHE=cache)
    env.pop("AMK_REFERENCE_SEED", None)
    if seed is not None:
        env["AMK_REFERENCE_SEED"] = seed
    return subprocess.run(["bash", "-c", f'source "{SCRIPT}"; {commands}'], env=env,
                          capture_output=True, text=True)


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


class ReferenceCache(unittest.TestCase):
    def test_a_saved_cache_seeds_a_new_machine(self):
        with tempfile.TemporaryDirectory() as d:
            first, second, out = (os.path.join(d, x) for x in ("m1", "m2", "out"))
            write(os.path.join(first, "ref-aa-300-1.bin"), b"logits of the 8B")
            write(os.path.join(first, "ref-bb-0,65-2.bin"), b"logits of the 1B")
            os.makedirs(out)
            r = run(first, None, f'reference_cache_save "{out}"')
            self.assertEqual(r.returncode, 0, r.stderr)
            tgz = os.path.join(out, "references.tgz")
            with tarfile.open(tgz) as t:
                names = sorted(os.path.basename(n) for n in t.getnames() if n not in (".", "./"))
            self.assertEqual(names, ["ref-aa-300-1.bin", "ref-bb-0,65-2.bin"])
            # The next machine already has one entry of its own: the seed does not overwrite it.
            write(os.path.join(second, "ref-aa-300-1.bin"), b"computed here")
            r = run(second, tgz, "reference_cache_seed")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("2 entries", r.stdout)
            with open(os.path.join(second, "ref-aa-300-1.bin"), "rb") as f:
                self.assertEqual(f.read(), b"computed here")
            with open(os.path.join(second, "ref-bb-0,65-2.bin"), "rb") as f:
                self.assertEqual(f.read(), b"logits of the 1B")

    def test_a_folder_seeds_too(self):
        with tempfile.TemporaryDirectory() as d:
            seed, cache = os.path.join(d, "seed"), os.path.join(d, "cache")
            write(os.path.join(seed, "ref-cc-65-1.bin"), b"qwen3")
            r = run(cache, seed, "reference_cache_seed")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(os.path.isfile(os.path.join(cache, "ref-cc-65-1.bin")))

    def test_an_empty_cache_saves_nothing(self):
        with tempfile.TemporaryDirectory() as d:
            cache, out = os.path.join(d, "cache"), os.path.join(d, "out")
            os.makedirs(cache)
            os.makedirs(out)
            r = run(cache, None, f'reference_cache_seed; reference_cache_save "{out}"')
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(os.listdir(out), [])

    def test_an_unreadable_seed_is_said_and_seeds_nothing(self):
        with tempfile.TemporaryDirectory() as d:
            cache = os.path.join(d, "cache")
            bad = os.path.join(d, "references.tgz")
            write(bad, b"not a gzip file")
            r = run(cache, bad, "reference_cache_seed; echo went-on")
            self.assertIn("cannot unpack", r.stderr)
            self.assertIn("went-on", r.stdout)
            self.assertEqual(os.listdir(cache), [])
            r = run(cache, os.path.join(d, "missing.tgz"), "reference_cache_seed; echo went-on")
            self.assertIn("neither a file nor a folder", r.stderr)
            self.assertIn("went-on", r.stdout)


if __name__ == "__main__":
    unittest.main()
