"""Pages of the Streamlit app; `state` holds the shared sidebar and the cached hbmsim calls."""
