"""dplint's rules, one module each (installed as `dplint.rules`). The registry finds them."""
