"""mediaflow: a durable media streaming pipeline for cameras and microphones."""
