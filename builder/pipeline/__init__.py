"""`klein-web reference`: the text-to-image pipeline on onnxruntime CPU and the numerics it shares with the app."""
