"""Hardware-facing code: enumerate and open cameras and microphones, real and virtual."""
