"""The NKI (AWS Trainium) port of RMSNorm: kernels.py (real NKI), driver.py (runs them), emulator/ (CI stand-in)."""
