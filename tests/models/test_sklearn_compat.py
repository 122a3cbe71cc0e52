"""scikit-learn's estimator checks on RankSVM.

RankSVM is neither a classifier nor a regressor: it ranks samples by binary
relevance, so y must hold labels in {0, 1} or {-1, 1}.  scikit-learn's
generic checks feed such an estimator 3- or 4-class targets, which RankSVM
rejects; those checks are listed below as expected failures, and the test
verifies that each of them fails for exactly that reason (and still fails,
so the list cannot go stale).

To still run those checks' real content, the same suite runs a second time
on a test-only subclass whose sole change is the tag
``classifier_tags.multi_class = False``: scikit-learn then binarises the
targets it generates, so the checks exercise RankSVM's fit and
decision_function on valid input.
"""
from __future__ import annotations

import re
import warnings

import pytest
from sklearn.utils import ClassifierTags
from sklearn.utils.estimator_checks import check_estimator

from rankopt import RankSVM

BINARY_LABELS_ONLY = re.compile(r"expected y to hold labels in \{0, 1\} or \{-1, 1\}, got \[")

_MULTICLASS = (
    "feeds a 3- or 4-class target; RankSVM ranks by binary relevance and only takes "
    "labels in {0, 1} or {-1, 1} (run on binary targets in the second test)"
)
_ONE_TWO = (
    "feeds the labels {1, 2}: which class is relevant is undefined, so RankSVM only "
    "takes {0, 1} or {-1, 1} (float32 and integer X are covered in test_rank_svm.py)"
)
_ARRAY_API = (
    "RankSVM does not claim array-API support; scikit-learn skips this check unless "
    "SCIPY_ARRAY_API=1 is set before SciPy is imported"
)

#: Checks that do not apply to a binary-relevance ranker, with the reason.
EXPECTED_FAILED_CHECKS = {
    "check_fit_score_takes_y": _MULTICLASS,
    "check_estimators_overwrite_params": _MULTICLASS,
    "check_dont_overwrite_parameters": _MULTICLASS,
    "check_estimators_fit_returns_self": _MULTICLASS,
    "check_readonly_memmap_input": _MULTICLASS,
    "check_n_features_in_after_fitting": _MULTICLASS,
    "check_positive_only_tag_during_fit": _MULTICLASS,
    "check_dtype_object": _MULTICLASS,
    "check_estimator_sparse_tag": _MULTICLASS,
    "check_estimator_sparse_array": _MULTICLASS,
    "check_estimator_sparse_matrix": _MULTICLASS,
    "check_f_contiguous_array_estimator": _MULTICLASS,
    "check_methods_sample_order_invariance": _MULTICLASS,
    "check_methods_subset_invariance": _MULTICLASS,
    "check_dict_unchanged": _MULTICLASS,
    "check_fit2d_predict1d": _MULTICLASS,
    "check_estimators_dtypes": _ONE_TWO,
    "check_fit2d_1feature": _ONE_TWO,
    "check_array_api_input": _ARRAY_API,
}

#: With binary targets, only the checks that feed {1, 2} (and array API) remain.
EXPECTED_FAILED_CHECKS_BINARY = {
    name: reason for name, reason in EXPECTED_FAILED_CHECKS.items() if reason is not _MULTICLASS
}


class _BinaryTargetRankSVM(RankSVM):
    """RankSVM with ``classifier_tags.multi_class=False`` so that sklearn's checks feed binary y."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags = ClassifierTags(multi_class=False)
        return tags


def _causes(exc):
    while exc is not None:
        yield exc
        exc = exc.__cause__ or exc.__context__


def _run_checks(estimator, expected):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # checks emit SkipTestWarning and the like
        results = check_estimator(estimator, expected_failed_checks=expected, on_fail=None)
    return {result["check_name"]: result for result in results}


def _assert_results(results, expected):
    failed = {
        name: f"{type(r['exception']).__name__}: {r['exception']}"
        for name, r in results.items()
        if r["status"] == "failed"
    }
    assert not failed, "scikit-learn checks failed:\n" + "\n".join(f"{k}: {v}" for k, v in failed.items())

    unexpected_skips = [n for n, r in results.items() if r["status"] == "skipped" and n not in expected]
    assert not unexpected_skips, unexpected_skips

    stale = [name for name in expected if name in results and results[name]["status"] == "passed"]
    assert not stale, f"these checks pass now; remove them from the expected failures: {stale}"

    for name, result in results.items():
        if result["status"] != "xfail":
            continue
        if expected[name] is _ARRAY_API:
            continue
        messages = [str(exc) for exc in _causes(result["exception"])]
        assert any(BINARY_LABELS_ONLY.search(m) for m in messages), (
            f"{name} was expected to fail only because of its non-binary target, but failed with: {messages}"
        )
    assert "check_array_api_input" not in results or results["check_array_api_input"]["status"] in (
        "skipped",
        "xfail",
    )


@pytest.fixture
def estimator():
    # Small data in every check; max_iter bounds the worst case all the same.
    return RankSVM(max_iter=200)


def test_sklearn_estimator_checks(estimator):
    results = _run_checks(estimator, EXPECTED_FAILED_CHECKS)
    assert len(results) > 30
    _assert_results(results, EXPECTED_FAILED_CHECKS)


def test_sklearn_estimator_checks_with_binary_targets():
    results = _run_checks(_BinaryTargetRankSVM(max_iter=200), EXPECTED_FAILED_CHECKS_BINARY)
    assert len(results) > 30
    _assert_results(results, EXPECTED_FAILED_CHECKS_BINARY)
    # the label-feeding checks really ran and passed on valid (binary) input
    for name, reason in EXPECTED_FAILED_CHECKS.items():
        if reason is _MULTICLASS:
            assert results[name]["status"] == "passed", name


def test_expected_failures_each_give_a_reason():
    for name, reason in EXPECTED_FAILED_CHECKS.items():
        assert name.startswith("check_") and len(reason) > 40
