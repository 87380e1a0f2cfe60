"""rafka.spark_bridge: see DESIGN.md section 1."""
