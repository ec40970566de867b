"""The results layer, free of JAX: the row schema, the theory's formulas, the exports, the plots
and the report page. It imports nothing of model, measure or cli, so that `specbench theory`,
`plot` and the exports start fast."""
