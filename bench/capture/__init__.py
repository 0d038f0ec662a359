"""CPU per camera-second of the camera connector's encoders, against FFmpeg and
GStreamer: ``python -m bench.capture``.
"""
