"""What the model did in each episode: transcripts (capture, compressed storage, reading a
run folder back), tool-call failure metrics, and the views of them (`piexp show`, the
self-contained `viewer.html`)."""
