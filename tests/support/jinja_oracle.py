"""The independent oracle for the chat-template tests: renders Jinja templates with jinja2 the way
Hugging Face transformers renders chat templates (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, the loopcontrols extension, and transformers' raise_exception, tojson and
strftime_now), so that amk's interpreter is compared with what users of transformers get.

  jinja_oracle.py render CASES.json OUT.json
      CASES.json: [{"template": str, "context": {...}}, ...]
      OUT.json:   [{"ok": true, "output": str} | {"ok": false, "error": str}, ...]
  jinja_oracle.py gguf-template MODEL.gguf OUT.txt
      writes the GGUF's tokenizer.chat_template metadata (UTF-8, unchanged)
"""
import json
import sys
from datetime import datetime


def make_environment():
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    # transformers replaces jinja's tojson (which HTML-escapes) with plain json.dumps.
    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(cases_path, out_path):
    env = make_environment()
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)
    results = []
    for case in cases:
        try:
            output = env.from_string(case["template"]).render(**case["context"])
            results.append({"ok": True, "output": output})
        except Exception as e:  # any refusal counts; the C++ side only checks that both refuse
            results.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(results, f, ensure_ascii=False)


def gguf_template(model_path, out_path):
    from gguf import GGUFReader

    field = GGUFReader(model_path).fields["tokenizer.chat_template"]
    with open(out_path, "wb") as f:
        f.write(bytes(field.parts[field.data[0]]))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "render":
        render(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "gguf-template":
        gguf_template(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
