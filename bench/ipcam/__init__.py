"""IP cameras: N RTSP streams recorded, pictured and watched live: ``python -m bench.ipcam``."""
