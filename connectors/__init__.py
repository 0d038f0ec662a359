"""Flow-facing sources: camera, microphone, file replay, network URL."""
