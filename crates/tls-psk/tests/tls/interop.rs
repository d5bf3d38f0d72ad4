mod stub {}
