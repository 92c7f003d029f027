"""Numbered plain-SQL migrations, shipped inside the package so installed images carry them."""
