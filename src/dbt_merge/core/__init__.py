"""What every merge family shares: one error base class, Spark SQL literals and
identifiers, Spark helpers and the check of SQL expression strings."""
