"""rafka.client: see DESIGN.md section 1."""
