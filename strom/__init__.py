"""Strom: Apache Fluss rebuilt in Python."""
