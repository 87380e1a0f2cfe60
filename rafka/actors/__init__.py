"""rafka.actors: see DESIGN.md section 1."""
