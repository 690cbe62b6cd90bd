"""Publication: the outputs' two-phase commit, their owners, reviews, pinned inputs, lineage names."""

from include.process.surface import lazy_surface

__all__, __getattr__, __dir__ = lazy_surface(__name__, {
    "review": ["APPROVE", "REJECT", "compare", "review_markdown", "review_of", "stage_for_review"],
    "openlineage": ["job_lineage"],
    "output_owners": ["OutputOwner"],
    "outputs": ["output_of_uri", "output_uri", "publish_dataset", "publish_delta", "published"],
    "arrivals": ["CHECKED", "arrival", "check_arrivals", "describe", "location_uri"],
    "publish": ["PublicationHistory", "Publisher"],
    "pinned_inputs": [
        "check_input", "check_still_there", "forget_hashes", "input_file_location", "pin_input", "pinned_files",
        "published_sizes"
    ],
})
