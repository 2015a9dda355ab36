"""The graph ops' numpy semantics: the reference executor (`executor.run_graph`)
and its kernels, one module per family (`kernels.ALL_KERNELS` lists them). The
frontend and graph-fold-constants fold with it, tests and `smelt explore` judge
with it where onnxruntime cannot; it imports only the dialects."""
