"""Embedded infrastructure for laptops and tests: the Tansu broker and a private Postgres."""
