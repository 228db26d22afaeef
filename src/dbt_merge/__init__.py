"""dbt_merge: merge algorithms that dbt Python models import.

The dbt side (macros, models, tests) lives in the dbt project at the repository
root; this package holds the Python the models call.
"""

__version__ = "0.1.0"
