"""Datasets: download (Hub, local files, synthetic) and conversion to verl's RL Parquet format."""
