"""A fixed set of fits over every structure and solver, digested: ``python tests/same_answers.py [OUT.json]``.

A refactoring that must not change answers runs this before and after and compares the two files: the
SHA-256 of each fit's ``coef_`` bytes and its ``n_iter_`` (bit-identical, on one machine and build).
"""

from __future__ import annotations

import hashlib
import json
import sys
import warnings

import numpy as np


def _digest(array) -> str:
    return hashlib.sha256(np.ascontiguousarray(np.asarray(array, dtype=np.float64)).tobytes()).hexdigest()[:16]


def _queries(rng, n_queries=30, size=12, d=6):
    qid = np.repeat(np.arange(n_queries), size)
    X = rng.normal(size=(qid.size, d))
    grades = np.clip(np.round(X[:, 0] + 0.7 * rng.normal(size=qid.size) + 1), 0, 4).astype(int)
    return X, grades, qid


def fits() -> dict[str, tuple[str, int]]:
    import rankopt
    from rankopt import HOAPSVM, HOBSVM, LatentAPSVM, RankSVM

    out = {}
    rng = np.random.default_rng(39)
    X, grades, qid = _queries(rng)
    rank_fits = {
        "ap": dict(loss="ap"),
        "pairwise": dict(loss="pairwise"),
        "ndcg_graded": dict(loss="ndcg_graded"),
        "precision_at_k": dict(loss=rankopt.get_loss("precision_at_k", k=3)),
        "dcg_zipf (graded plugin)": dict(loss="dcg_zipf"),
        "rbp (binary plugin)": dict(loss="rbp"),
        "ap bcfw": dict(loss="ap", solver="bcfw"),
    }
    for name, params in rank_fits.items():
        model = RankSVM(C=10.0, **params).fit(X, grades, qid=qid)
        out[name] = (_digest(model.coef_), int(model.n_iter_))
    one = qid == 0
    y = grades > 1
    Xa = rng.normal(size=(300, 5)) + 0.8 * (rng.random(300) < 0.2)[:, None]
    ya = Xa[:, 0] > 1.0
    model = RankSVM(C=10.0, approx=50).fit(Xa, ya)
    out["ap appx"] = (_digest(model.coef_), int(model.n_iter_))
    del one, y
    groups = rng.integers(0, 10, 40)
    yh = (rng.uniform(size=10) < 0.4)[groups] ^ (rng.uniform(size=40) < 0.1)
    yh[:2] = [True, False]
    Xh = rng.normal(size=(40, 4)) + 0.6 * yh[:, None] * (np.arange(4) == 0)
    hob = HOBSVM(C=10.0, eta=1.0).fit(Xh, yh, groups=groups)
    out["hob"] = (_digest(hob.coef_), int(hob.n_iter_))
    hoap = HOAPSVM(C=10.0, eta=1.0, cccp_max_iter=4).fit(Xh, yh, groups=groups)
    out["hoap"] = (_digest(hoap.coef_), int(hoap.n_iter_))
    bags, yb = [], []
    for label in [1] * 10 + [0] * 10:
        bag = rng.normal(size=(int(rng.integers(2, 5)), 5))
        if label:
            bag[rng.integers(bag.shape[0])] += 3.0 * (np.arange(5) == 0)
        bags.append(bag)
        yb.append(label)
    latent = LatentAPSVM(C=5.0, n_init=2, random_state=3).fit(bags, np.array(yb))
    out["latent ap"] = (_digest(latent.coef_), int(latent.n_iter_))
    return out


if __name__ == "__main__":
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fits()
    text = json.dumps(result, indent=1, sort_keys=True)
    print(text)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as handle:
            handle.write(text + "\n")
