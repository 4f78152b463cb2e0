#!/usr/bin/env python3
"""Checks Kubernetes manifests against the API's own types, without a cluster:
every field of every document must be a field of its kind's type, with a
value of the right kind, and the required fields must be there, as the
official Kubernetes Python client's models (generated from the API's OpenAPI
schema) declare them. An API server without strict field validation drops
an unknown field silently (`automountServiceAcountToken: false` would leave
the token mounted); this says so, one line per field.

  deploy/check-manifest.py deploy/daemonset.yaml [MORE.yaml ...]
  (needs `pip install kubernetes pyyaml`; exit 0: valid, 1: not, 2: usage)
"""

from __future__ import annotations

import sys
from typing import List


def schema_errors(value, type_name: str, path: str, client) -> List[str]:
    """Where `value` is not of the API type `type_name` (a client model name,
    or List[...], Dict[str, ...], str, int, bool, float, object)."""
    if type_name.startswith("List["):
        if not isinstance(value, list):
            return [f"{path}: a list expected"]
        return [e for i, v in enumerate(value) for e in schema_errors(v, type_name[5:-1], f"{path}[{i}]", client)]
    if type_name.startswith("Dict["):
        inner = type_name[5:-1].split(", ", 1)[1]
        if not isinstance(value, dict):
            return [f"{path}: a map expected"]
        return [e for k, v in value.items() for e in schema_errors(v, inner, f"{path}.{k}", client)]
    primitives = {"str": (str,), "int": (int,), "bool": (bool,), "float": (int, float), "object": (object,)}
    if type_name in primitives:
        ok = isinstance(value, primitives[type_name]) and not (type_name == "int" and isinstance(value, bool))
        return [] if ok else [f"{path}: {type_name} expected, got {value!r}"]
    model = getattr(client, type_name)
    if not isinstance(value, dict):
        return [f"{path}: an object ({type_name}) expected"]
    by_json = {j: a for a, j in model.attribute_map.items()}
    errors = [f"{path}.{k}: not a field of {type_name}" for k in value if k not in by_json]
    for k, v in value.items():
        if k in by_json:
            errors += schema_errors(v, model.openapi_types[by_json[k]], f"{path}.{k}", client)
    return errors


def check(path: str, client, yaml) -> List[str]:
    """The errors of every document in the file `path`."""
    errors = []
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    api = client.ApiClient()
    for n, doc in enumerate(docs):
        kind = doc.get("kind", "?") if isinstance(doc, dict) else "?"
        version = str(doc.get("apiVersion", "")).rsplit("/", 1)[-1] if isinstance(doc, dict) else ""
        type_name = f"{version.capitalize()}{kind}"
        where = f"{path}: document {n + 1} ({kind})"
        if not hasattr(client, type_name):
            errors.append(f"{where}: no API type {type_name} for apiVersion {doc.get('apiVersion')!r}")
            continue
        errors += [f"{where}: {e}" for e in schema_errors(doc, type_name, kind, client)]
        try:
            api._ApiClient__deserialize(doc, type_name)  # the models raise on a required field left out
        except (ValueError, TypeError) as e:
            errors.append(f"{where}: " + " ".join(str(e).split()))
    return errors


def main(argv: List[str]) -> int:
    if len(argv) < 2:
        print("usage: deploy/check-manifest.py MANIFEST.yaml [...]", file=sys.stderr)
        return 2
    try:
        import yaml
        from kubernetes import client
    except ImportError as e:
        print(f"check-manifest.py: {e}: pip install kubernetes pyyaml", file=sys.stderr)
        return 2
    errors = [e for path in argv[1:] for e in check(path, client, yaml)]
    for e in errors:
        print(e, file=sys.stderr)
    if not errors:
        print(f"check-manifest.py: {', '.join(argv[1:])}: every field is the API's (kubernetes client "
              f"{__import__('kubernetes').__version__})")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
