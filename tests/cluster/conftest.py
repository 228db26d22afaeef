"""The `cluster` marker: `pytest -m "not cluster"` skips the Spark standalone cluster test."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "cluster: starts a Spark standalone cluster (scripts/cluster.sh) and runs the demo on it",
    )
