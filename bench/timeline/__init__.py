"""``python -m bench.timeline``: exporting a recorded range, against ffmpeg's concat demuxer."""
