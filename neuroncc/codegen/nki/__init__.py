"""neuroncc.codegen.nki."""
