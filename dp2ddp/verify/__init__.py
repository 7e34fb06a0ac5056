"""``dp2ddp verify``: run the original and the converted script and compare their losses.

Nothing here imports LibCST: the verifier runs programs and compares numbers.

- ``runner`` launches the reference (one process) and the converted script (torchrun);
- ``bootstrap`` runs inside each of those processes, installs the patches and runs the script;
- ``capture``, ``alignment``, ``synthetic`` and ``cpu_device`` are those patches;
- ``compare`` turns the recorded losses into a verdict, ``render`` prints it.
"""
