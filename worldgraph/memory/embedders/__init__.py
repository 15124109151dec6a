"""Text embedders, one module each: base (protocol and checks), hashing, openai_compat,
numpy_bert (fp32 MiniLM), onnx_runner (onnxruntime), catalog (the local models) and factory.
``worldgraph.memory.embeddings`` re-exports the public names."""
