"""The state directory's writer process: claims and settles written by a child of ours.

process.py is the parent's side (:class:`~.process.WriterProcess`), child.py the child's
(started as ``python -m trio_routines.stores.directory.writer.child``), wire.py the framing
both speak, replies.py the parent's reading of a reply and call.py one call in flight. The
child imports neither Trio nor the store: it starts in a fraction of the time.
"""
