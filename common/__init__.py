"""Small helpers shared by the packages: atomic file writes (`common.atomic`), the usable CPU
count (`common.cpu`), the private server process (`common.serve_process`), children that end
with their parent (`common.tied_child`) and the HTML page kit (`common.html_page`). It imports
nothing else of ours (the protocol package at most)."""
