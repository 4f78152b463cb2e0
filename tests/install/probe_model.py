"""Runs inside the container of test_wheel_without_compiler.py, with the
wheel installed and nothing else: a model's predict profiled at depth 2,
the tree printed, a profile saved and loaded back."""

import sys

from mlflow_profiler import load, profiling


class Model:
    def clean(self, rows):
        return [r for r in rows if r is not None]

    def features(self, rows):
        return [(r, r * r) for r in rows]

    def score(self, feats):
        return [a * 0.5 + b * 0.01 for a, b in feats]

    def predict(self, rows):
        return self.score(self.features(self.clean(rows)))


model = Model()
rows = list(range(1000)) + [None]
expected = model.predict(rows)
with profiling(depth=2) as session:
    got = model.predict(rows)
assert got == expected
session.print_tree()
(root,) = session.to_tree()
assert root["label"] == "Model.predict", root["label"]
assert [c["label"] for c in root["children"]] == ["Model.clean", "Model.features", "Model.score"]
path = session.save(sys.argv[1])
again = load(path)
print(f"engine {session.statistics()['engine']}; saved and loaded back {len(again.spans)} spans")
