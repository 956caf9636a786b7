"""The model repository: discovering models on disk, loading, unloading and polling them."""
