"""Strom's lake tiering service, a Spark application: the driver takes tables from the coordinator,
executors copy bucket ranges into the lake, and the driver commits each round exactly once."""
