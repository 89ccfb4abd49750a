"""The state directory's writer process: claims and settles written by a child of ours.

process.py is the parent's side (:class:`~.process.WriterProcess`), child.py the child's
(started as ``python -m trio_routines.stores.directory.writer.child``), wire.py the framing
both speak and call.py one call in flight.
"""
