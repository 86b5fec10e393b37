"""The way out of a trained run: load a model, export it (pt2, onnx, torchscript) and predict with it."""
