"""The reference runtime (host side, NumPy only): the executable specification of Helios.

`operators` holds one NumPy function per operator of the set, `interpreter` executes a captured
program, `philox` and `sampling` define the random draws and the sampling filters bit for bit.
Nothing here imports torch or triton; a test enforces it.
"""
