"""The pure core: the domain, the verdict rules of SPEC section 4, and the seams the shell fills.

Plain functions over plain data. Nothing here does I/O or imports any other part of the package
(tests/test_layers.py holds it to that); the store, the probes, the ledger, the service and the
runtime are the shell around it.
"""
