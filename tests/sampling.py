"""How many random cases a randomised test runs: one setting for the whole suite.

``DBT_MERGE_TEST_PROFILE`` is ``ci`` (the default, `make test`) or ``long``
(`make test-long`, run before a release):

* ``ci``: each randomised test runs its fixed seeds and number of rounds, chosen so that
  every kind of change it is about appears in them (the tests assert that it does);
* ``long``: the same, plus fresh seeds and more rounds. The fresh seeds are
  ``DBT_MERGE_TEST_SEED``, ``+1``, ``+2``… (`make test-long` draws it and prints it), so
  every worker of a run collects the same tests, and a failing seed, which stands in the
  test's id or its message, is replayed with
  ``DBT_MERGE_TEST_PROFILE=long DBT_MERGE_TEST_SEED=<seed> pytest <test>``.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable

PROFILE_ENV = "DBT_MERGE_TEST_PROFILE"
SEED_ENV = "DBT_MERGE_TEST_SEED"
PROFILES = ("ci", "long")

PROFILE = os.environ.get(PROFILE_ENV, "ci")
if PROFILE not in PROFILES:
    raise ValueError(f"{PROFILE_ENV} is {PROFILE!r}: expected one of {', '.join(PROFILES)}")
LONG = PROFILE == "long"
# without DBT_MERGE_TEST_SEED, a long run's fresh seeds are the day's (the same in
# every worker of the run)
FRESH_SEED = int(os.environ.get(SEED_ENV) or dt.date.today().strftime("%Y%m%d"))


def seeds(ci: Iterable[int], fresh: int = 2) -> list[int]:
    """The seeds of a test parametrised by seed: ci in the CI profile; in the long one
    also ``fresh`` fresh seeds."""
    return [*ci, *(FRESH_SEED + i for i in range(fresh))] if LONG else list(ci)


def seed(ci: int) -> int:
    """The seed of a test that runs one random sequence: ci, or the long run's first
    fresh seed. Printed, so that a failure's captured output names it."""
    value = FRESH_SEED if LONG else ci
    print(f"random sequence: {described(value)}")
    return value


def rounds(ci: int, long: int) -> int:
    """The number of random rounds of a test: ci, or long in the long profile."""
    return long if LONG else ci


def described(seed_value: int) -> str:
    """How a failure message names the seed, to replay it."""
    return (
        f"seed {seed_value} (profile {PROFILE}; replay: {PROFILE_ENV}=long {SEED_ENV}={seed_value})"
    )
