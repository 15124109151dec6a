"""What the embedded store's guard lets a query name: the engine's functions, and the words of
its read clauses (``guard``).

``FUNCTIONS`` is LadybugDB 0.22.0's scalar, aggregate and rewrite functions (``CALL
show_functions()``; ``tests/unit/kg/test_cypher_guard_embedded.py`` compares it with the
installed engine's and fails when they differ, so a new engine version is read before its
functions are allowed), less ``nextval``, ``currval`` (sequences) and ``setseed`` (a state of the
engine), plus the Neo4j names ``text.translate`` rewrites. Table functions (``show_tables``,
``current_setting``, ``read_csv_serial`` ...) are not in it: they run only through CALL or LOAD
FROM, which are refused.
"""

from __future__ import annotations

__all__ = ["AFTER_EXPRESSION", "DENIED", "ENGINE_FUNCTIONS", "FUNCTIONS", "KEYWORD_CALLS", "STARTS", "TABLE_FUNCTIONS",
           "TRANSLATED"]

ENGINE_FUNCTIONS = frozenset("""
    abs acos all any array_append array_cat array_concat array_contains array_cosine_similarity
    array_cross_product array_distance array_dot_product array_extract array_has array_indexof
    array_inner_product array_position array_prepend array_push_back array_push_front
    array_slice array_squared_distance array_value asin atan atan2 avg bitshift_left
    bitshift_right bitwise_and bitwise_or bitwise_xor blob cardinality cast cbrt ceil ceiling
    century coalesce collect concat concat_ws constant_or_null contains cos cost cot count
    count_if count_star current_date current_timestamp date date_part date_trunc datepart
    datetrunc dayname decode degrees duration element_at encode end_node ends_with epoch_ms
    equals error even factorial floor gamma gen_random_uuid greater_than greater_than_equals
    greatest hash histogram id ifnull initcap internal_id interval is_acyclic is_trail keys
    label labels last_day lcase least left length less_than less_than_equals levenshtein lgamma
    list_any_value list_append list_cat list_concat list_contains list_creation list_distinct
    list_element list_extract list_filter list_has list_has_all list_has_any list_indexof
    list_max list_min list_position list_prepend list_product list_reduce list_reverse
    list_reverse_sort list_slice list_sort list_sum list_to_string list_transform list_unique ln
    log log10 log2 lower lpad ltrim make_date map map_extract map_keys map_values max md5 min
    monthname negate nodes none not_equals nullif octet_length offset percentilecont
    percentiledisc pi pow prefix properties radians random range regexp_extract
    regexp_extract_all regexp_full_match regexp_matches regexp_replace regexp_split_to_array
    relationships rels repeat replace reverse right round rowid rpad rtrim sha256 sign sin
    single size split_part sqrt start_node starts_with str_split string string_split
    string_to_array struct_extract struct_pack substr substring suffix sum tan time_bucket
    timestamp to_blob to_bool to_date to_days to_double to_epoch_ms to_float to_hours to_int128
    to_int16 to_int32 to_int64 to_int8 to_interval to_microseconds to_milliseconds to_minutes
    to_months to_seconds to_serial to_string to_timestamp to_uint128 to_uint16 to_uint32
    to_uint64 to_uint8 to_uuid to_years tolower toupper trim typeof ucase union_extract
    union_tag union_value upper uuid
""".split())
# the engine's table and copy functions: never called (named, to say so)
TABLE_FUNCTIONS = frozenset("""
    _cache_array_column_locally bm_info catalog_version clear_warnings copy_csv copy_parquet
    current_setting db_version disk_info disk_size_info drop_projected_graph file_info fsm_info
    project_graph project_graph_cypher projected_graph_info read_csv_parallel read_csv_serial
    read_npy read_pandas read_parquet show_attached_databases show_connection show_functions
    show_graphs show_indexes show_loaded_extensions show_macros show_official_extensions
    show_projected_graphs show_sequences show_tables show_warnings stats_info storage_info
    storage_version table_info
""".split())
# the Neo4j spellings translate() rewrites, and Neo4j functions the engine has under that name too
FUNCTIONS = ENGINE_FUNCTIONS | {"tostring", "tointeger", "tofloat", "toboolean", "type", "labels", "exists"}
# names text.translate() refuses itself, with what to write instead
TRANSLATED = frozenset({"shortestpath", "allshortestpaths"})

# The words a statement, or a part after UNION [ALL], may start with: the read clauses.
STARTS = frozenset({"MATCH", "OPTIONAL", "WITH", "UNWIND", "RETURN"})
# The words that may follow the end of an expression (a name, a literal, a closing bracket): the
# read clauses and the infix and closing keywords. Any other word there starts a clause the
# guard does not allow (``1 LOAD FROM``, ``x CREATE``).
AFTER_EXPRESSION = STARTS | {
    "WHERE", "ORDER", "SKIP", "LIMIT", "UNION", "AS", "AND", "OR", "XOR", "NOT", "IS", "IN", "STARTS", "ENDS",
    "CONTAINS", "ASC", "ASCENDING", "DESC", "DESCENDING", "WHEN", "THEN", "ELSE", "END"}
# Words that are keywords followed by a bracket, not function calls.
KEYWORD_CALLS = AFTER_EXPRESSION | {"CASE", "EXISTS", "COUNT", "ANY", "ALL", "NONE", "SINGLE", "DISTINCT", "BY", "CAST",
                                   "DECIMAL", "MAP", "STRUCT"}  # (the last three: types, in CAST)
# The engine's words of clauses that write, read files, load extensions, change settings or
# administer (LadybugDB reserves few of them: ``WITH 1 AS load`` parses), refused wherever they
# stand as a bare word; as a property (``n.load``), label (``:Set``), parameter or in backticks
# they are names.
DENIED = frozenset({
    "CREATE", "MERGE", "SET", "DELETE", "DETACH", "REMOVE", "DROP", "ALTER", "RENAME", "COPY", "LOAD", "INSTALL",
    "UNINSTALL", "ATTACH", "USE", "EXPORT", "IMPORT", "BEGIN", "COMMIT", "ROLLBACK", "CHECKPOINT", "CALL", "MACRO",
    "PROJECT", "COMMENT", "EXPLAIN", "PROFILE", "FOREACH", "YIELD", "TRANSACTION", "TRANSACTIONS", "SHOW",
    "TERMINATE", "GRANT", "DENY", "REVOKE", "COMMIT_SKIP_CHECKPOINT", "ROLLBACK_SKIP_CHECKPOINT"})
