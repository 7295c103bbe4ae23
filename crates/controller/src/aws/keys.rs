//! TEMPORARY stand-in until the keys module lands.
pub fn load_key_secret(path: &std::path::Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}
pub fn derive_secret(master: &[u8], id: &str) -> String {
    format!("{}{}", master.len(), id)
}
