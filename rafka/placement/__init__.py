"""rafka.placement: see DESIGN.md section 1."""
