//! nvmf-host
