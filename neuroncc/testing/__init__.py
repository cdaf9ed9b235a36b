"""Test support shared by the test suites: random graph strategies, model graphs, semantic checks."""
