"""track's terminal lines and track.html, and the trained-taps page (the training wing's render/)."""
