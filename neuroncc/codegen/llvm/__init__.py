"""neuroncc.codegen.llvm."""
