"""User code vs libraries: classification, user_modules, collapse_frameworks."""

from __future__ import annotations

import json

from _helpers import tree_lines, walk

from mlflow_profiler import profiling


def serialize(obj):
    return json.dumps(obj)


def model(obj):
    return serialize(obj) + serialize([obj])


PAYLOAD = {"a": [1, 2, 3], "b": {"c": 1.5}}


def capture(engine, depth=-1):
    with profiling(depth=depth, engine=engine) as session:
        model(PAYLOAD)
    return session


def test_stdlib_is_not_user_code(engine):
    session = capture(engine)
    flat = session.to_flat()
    by_label = {}
    for r in flat:
        by_label.setdefault(r["label"], []).append(r)
    assert all(r["is_user_code"] for r in by_label["model"] + by_label["serialize"])
    dumps = by_label["dumps"]
    assert len(dumps) == 2
    for r in dumps:
        assert r["module"] == "json"
        assert r["is_user_code"] is False
        assert r["call_path"].startswith("model/serialize/dumps")
    # the library's own callees are there too, and are library code
    lib = [r for r in flat if r["module"].startswith("json")]
    assert len(lib) > 2 and not any(r["is_user_code"] for r in lib)
    spans = {s.label: s for s in session.spans}
    assert spans["model"].is_user_code and not spans["dumps"].is_user_code


def test_user_modules_override(engine):
    session = capture(engine)
    flat = session.to_flat(user_modules=["json"])
    assert all(r["is_user_code"] for r in flat if r["module"].startswith("json"))
    # a prefix matches whole components only
    flat = session.to_flat(user_modules=["js"])
    assert not any(r["is_user_code"] for r in flat if r["module"].startswith("json"))
    tree = session.to_tree(user_modules=["json.encoder"])
    for n in walk(tree):
        if n["module"] == "json.encoder":
            assert n["is_user_code"]
        elif n["module"] == "json":
            assert not n["is_user_code"]


def test_collapse_frameworks(engine):
    session = capture(engine)
    text = session.format_tree(collapse_frameworks=True)
    lines = tree_lines(text)
    names = [ln.split(":")[0] for ln in lines]
    assert names == ["model", "  serialize", "    [json]", "  serialize", "    [json]"]
    assert "dumps" not in text and "JSONEncoder" not in text
    tree = session.to_tree(collapse_frameworks=True)
    collapsed = [n for n in walk(tree) if n["collapsed"]]
    assert len(collapsed) == 2
    for n in collapsed:
        assert n["label"] == "[json]" and n["children"] == [] and not n["is_user_code"]
        assert n["duration_ns"] > 0
    # with json declared as user code nothing is collapsed
    text = session.format_tree(collapse_frameworks=True, user_modules=["json"])
    assert "[json]" not in text and "dumps" in text


def test_collapse_merges_consecutive_library_siblings(engine):
    def many():
        for i in range(3):
            json.dumps(i)
        serialize(1)

    with profiling(depth=-1, engine=engine) as session:
        many()
    (root,) = session.to_tree(collapse_frameworks=True)
    kids = root["children"]
    assert [k["label"] for k in kids] == ["[json]", "serialize"]
    assert kids[0]["merged"] == 3
    assert "[x3]" in session.format_tree(collapse_frameworks=True)


def test_user_code_in_the_json_document(engine):
    session = capture(engine)
    doc = json.loads(session.to_json())
    fields = doc["function_fields"]
    strings = doc["strings"]
    functions = {strings[row[fields.index("name")]]: row for row in doc["functions"]}
    assert functions["model"][fields.index("user_code")] == 1
    assert functions["dumps"][fields.index("user_code")] == 0
