"""Auto-merge plan of daily_events: which runs of small, adjacent files to merge.

The planner (``dbt_merge.auto_merge.plan_table``) reads the table's own metadata
(``data_files``, ordered by ``event_date``) and the options in this model's
``auto_merge`` config (daily_events_merge_plan.yml). Building the plan changes
nothing; ``dbt run-operation dbt_merge.execute_auto_merge`` carries it out.
"""

from dbt_merge.auto_merge import plan_table


def model(dbt, session):
    dbt.config(materialized="table")
    return plan_table(
        session,
        dbt.ref("daily_events"),
        model_name=dbt.this.identifier,
        config=dbt.config.get("auto_merge"),
    )
