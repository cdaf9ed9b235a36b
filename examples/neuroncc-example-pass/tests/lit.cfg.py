from neuroncc.testing.lit_format import configure

configure(config, __file__)  # noqa: F821 (lit defines `config`)
